//! Client tokens: a signed JWT (RFC 7519) that lets a client publish to or subscribe to some
//! canvases until it expires, modelled on Centrifugo's connection and subscription tokens.
//!
//! Claims:
//!
//! | claim | required | meaning |
//! |---|---|---|
//! | `exp` | yes | expiry, Unix seconds; no leeway |
//! | `canvases` | yes | the canvases allowed: exact ids (`c1`) or a prefix ending in `*` (`team-*`; `*` alone is every canvas) |
//! | `allow` | no | what the token may do: `["publish"]`, `["subscribe"]` or both (absent = both) |
//! | `sub` | no | who it was issued to (logged) |
//!
//! The signature is HS256 (a shared secret, `CLIENT_TOKEN_HS256_SECRET`) or RS256 (an RSA public
//! key in PEM, `CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE`), verified with the `jsonwebtoken` crate; a
//! token of the other algorithm (or `none`) is refused. With neither setting, no token is needed.
//!
//! Refusals ([`TokenError`]): no token, a bad one (signature, algorithm, shape) or an expired one
//! are 401 (`missing_token`, `invalid_token`, `token_expired`); a valid token that does not allow
//! the canvas or the action is 403 `token_not_allowed`. On a WebSocket they are close 1008 Policy
//! Violation with the same words as the reason.

use crate::http::ApiError;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a client does with a canvas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// `POST /canvases/{id}/pixels`, `POST /pixels` (publisher; via the gateway's `/api/...`).
    Publish,
    /// `GET /ws?canvas=<id>` (gateway and node).
    Subscribe,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Publish => "publish",
            Action::Subscribe => "subscribe",
        }
    }
}

#[derive(Debug, Deserialize)]
struct Claims {
    exp: u64,
    #[serde(default)]
    sub: Option<String>,
    canvases: Vec<String>,
    #[serde(default)]
    allow: Option<Vec<Action>>,
}

/// A verified token: what it allows, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Expiry, Unix seconds.
    pub exp: u64,
    pub sub: Option<String>,
    canvases: Vec<String>,
    allow: Vec<Action>,
}

impl Grant {
    /// Whether the token allows `action` on `canvas`.
    pub fn allows(&self, canvas: &str, action: Action) -> bool {
        self.allow.contains(&action) && self.canvases.iter().any(|p| pattern_matches(p, canvas))
    }

    /// [`Grant::allows`] as a result.
    ///
    /// # Errors
    /// [`TokenError::NotAllowed`].
    pub fn check(&self, canvas: &str, action: Action) -> Result<(), TokenError> {
        if self.allows(canvas, action) {
            Ok(())
        } else {
            Err(TokenError::NotAllowed { canvas: canvas.to_owned(), action: action.as_str() })
        }
    }

    /// How long from `now` until the token expires (zero when it has).
    pub fn remaining(&self, now: SystemTime) -> Duration {
        (UNIX_EPOCH + Duration::from_secs(self.exp)).duration_since(now).unwrap_or(Duration::ZERO)
    }
}

/// `c1` matches only `c1`; `team-*` every id starting with `team-`; `*` every id.
pub fn pattern_matches(pattern: &str, canvas: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => canvas.starts_with(prefix),
        None => pattern == canvas,
    }
}

/// Why a request's client token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("a client token is required")]
    Missing,
    #[error("token expired")]
    Expired,
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("the token does not allow {action} on canvas {canvas}")]
    NotAllowed { canvas: String, action: &'static str },
}

impl TokenError {
    /// The machine-readable code of the HTTP answer and the `error` frame.
    pub fn code(&self) -> &'static str {
        match self {
            TokenError::Missing => "missing_token",
            TokenError::Expired => "token_expired",
            TokenError::Invalid(_) => "invalid_token",
            TokenError::NotAllowed { .. } => "token_not_allowed",
        }
    }

    /// The HTTP answer: 401, or 403 for a valid token that does not allow the request.
    pub fn api_error(&self) -> ApiError {
        match self {
            TokenError::NotAllowed { .. } => ApiError::forbidden(self.code(), self.to_string()),
            _ => ApiError::unauthorized(self.code(), self.to_string()),
        }
    }

    /// The reason of a close 1008 (at most 123 bytes, RFC 6455 §5.5).
    pub fn close_reason(&self) -> String {
        let mut r = self.to_string();
        if r.len() > 123 {
            let mut end = 120;
            while !r.is_char_boundary(end) {
                end -= 1;
            }
            r.truncate(end);
            r.push_str("...");
        }
        r
    }
}

/// The key that verifies client tokens.
#[derive(Clone)]
pub struct ClientTokens {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for ClientTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientTokens({:?})", self.validation.algorithms)
    }
}

impl ClientTokens {
    fn with(key: DecodingKey, alg: Algorithm) -> Self {
        let mut validation = Validation::new(alg);
        validation.leeway = 0;
        validation.validate_exp = true;
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp"]);
        Self { key, validation }
    }

    /// Tokens signed with HS256 and `secret`.
    pub fn hs256(secret: &[u8]) -> Self {
        Self::with(DecodingKey::from_secret(secret), Algorithm::HS256)
    }

    /// Tokens signed with RS256, verified with the RSA public key in `pem`.
    ///
    /// # Errors
    /// When `pem` is not an RSA public key in PEM.
    pub fn rs256_pem(pem: &[u8]) -> Result<Self, String> {
        let key = DecodingKey::from_rsa_pem(pem).map_err(|e| format!("not an RSA public key in PEM: {e}"))?;
        Ok(Self::with(key, Algorithm::RS256))
    }

    /// Verifies `token` (signature, algorithm, `exp` against the clock) and reads its grant.
    ///
    /// # Errors
    /// [`TokenError::Missing`], [`TokenError::Expired`] or [`TokenError::Invalid`].
    pub fn verify(&self, token: Option<&str>) -> Result<Grant, TokenError> {
        let token = token.map(str::trim).filter(|t| !t.is_empty()).ok_or(TokenError::Missing)?;
        let data = jsonwebtoken::decode::<Claims>(token, &self.key, &self.validation).map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature => TokenError::Expired,
            _ => TokenError::Invalid(e.to_string()),
        })?;
        let c = data.claims;
        Ok(Grant {
            exp: c.exp,
            sub: c.sub,
            canvases: c.canvases,
            allow: c.allow.unwrap_or_else(|| vec![Action::Publish, Action::Subscribe]),
        })
    }

    /// Verifies `token` and checks that it allows `action` on `canvas`.
    ///
    /// # Errors
    /// Any [`TokenError`].
    pub fn authorize(&self, token: Option<&str>, canvas: &str, action: Action) -> Result<Grant, TokenError> {
        let grant = self.verify(token)?;
        grant.check(canvas, action)?;
        Ok(grant)
    }
}

/// The client-token settings of a service (`#[command(flatten)]` in its `Config`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientTokenSettings {
    /// Require client tokens signed with HS256 and this secret (publishing and subscribing).
    #[arg(long = "client-token-hs256-secret", env = "CLIENT_TOKEN_HS256_SECRET", hide_env_values = true)]
    pub hs256_secret: Option<String>,
    /// Require client tokens signed with RS256, verified with the RSA public key in this PEM file.
    #[arg(long = "client-token-rs256-public-key-file", env = "CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE")]
    pub rs256_public_key_file: Option<PathBuf>,
}

impl ClientTokenSettings {
    fn secret(&self) -> Option<&str> {
        self.hs256_secret.as_deref().filter(|s| !s.is_empty())
    }

    /// The verifier, or `None` when client tokens are off.
    ///
    /// # Errors
    /// Both settings given, or the key file unreadable or not an RSA public key.
    pub fn load(&self) -> Result<Option<ClientTokens>, String> {
        match (self.secret(), &self.rs256_public_key_file) {
            (None, None) => Ok(None),
            (Some(_), Some(_)) => {
                Err("CLIENT_TOKEN_HS256_SECRET and CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE are both set; choose one".to_owned())
            }
            (Some(s), None) => Ok(Some(ClientTokens::hs256(s.as_bytes()))),
            (None, Some(path)) => {
                let pem = std::fs::read(path).map_err(|e| format!("CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE {}: {e}", path.display()))?;
                ClientTokens::rs256_pem(&pem)
                    .map(Some)
                    .map_err(|e| format!("CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE {}: {e}", path.display()))
            }
        }
    }

    /// The problems of these settings (empty when valid), for a `Config::problems`.
    pub fn problems(&self) -> Vec<String> {
        self.load().err().into_iter().collect()
    }

    /// `VARIABLE=value` pairs for a `Config::describe` (the secret is not shown).
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CLIENT_TOKEN_HS256_SECRET", if self.secret().is_some() { "<set>".to_owned() } else { String::new() }),
            (
                "CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE",
                self.rs256_public_key_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;

    // A 2048-bit RSA key pair made for these tests only.
    const RSA_PRIVATE: &str = include_str!("../testdata/client_token_rsa.key");
    const RSA_PUBLIC: &str = include_str!("../testdata/client_token_rsa.pub");

    fn now() -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
    }

    fn hs(secret: &str, claims: serde_json::Value) -> String {
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
    }

    fn rs(claims: serde_json::Value) -> String {
        encode(&Header::new(Algorithm::RS256), &claims, &EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap()).unwrap()
    }

    /// (name, verifier, token, canvas, action, expected code).
    type Case<'a> = (&'a str, &'a ClientTokens, Option<String>, &'a str, Action, Result<(), &'a str>);

    #[test]
    fn token_checks_table() {
        let hs_tokens = ClientTokens::hs256(b"k1");
        let rs_tokens = ClientTokens::rs256_pem(RSA_PUBLIC.as_bytes()).unwrap();
        let later = now() + 600;
        let good = json!({"exp": later, "sub": "u1", "canvases": ["c1", "team-*"]});
        let cases: Vec<Case> = vec![
            ("missing", &hs_tokens, None, "c1", Action::Subscribe, Err("missing_token")),
            ("empty", &hs_tokens, Some(String::new()), "c1", Action::Subscribe, Err("missing_token")),
            ("garbage", &hs_tokens, Some("not.a.jwt".into()), "c1", Action::Subscribe, Err("invalid_token")),
            ("right", &hs_tokens, Some(hs("k1", good.clone())), "c1", Action::Subscribe, Ok(())),
            ("right, publish", &hs_tokens, Some(hs("k1", good.clone())), "c1", Action::Publish, Ok(())),
            ("right, prefix", &hs_tokens, Some(hs("k1", good.clone())), "team-blue", Action::Subscribe, Ok(())),
            ("wrong secret", &hs_tokens, Some(hs("k2", good.clone())), "c1", Action::Subscribe, Err("invalid_token")),
            ("expired", &hs_tokens, Some(hs("k1", json!({"exp": now() - 5, "canvases": ["c1"]}))), "c1", Action::Subscribe, Err("token_expired")),
            ("no exp", &hs_tokens, Some(hs("k1", json!({"canvases": ["c1"]}))), "c1", Action::Subscribe, Err("invalid_token")),
            ("no canvases", &hs_tokens, Some(hs("k1", json!({"exp": later}))), "c1", Action::Subscribe, Err("invalid_token")),
            ("wrong canvas", &hs_tokens, Some(hs("k1", good.clone())), "c2", Action::Subscribe, Err("token_not_allowed")),
            ("prefix is not a match", &hs_tokens, Some(hs("k1", good.clone())), "team", Action::Subscribe, Err("token_not_allowed")),
            ("exact is not a prefix", &hs_tokens, Some(hs("k1", good.clone())), "c10", Action::Subscribe, Err("token_not_allowed")),
            (
                "subscribe only",
                &hs_tokens,
                Some(hs("k1", json!({"exp": later, "canvases": ["*"], "allow": ["subscribe"]}))),
                "c1",
                Action::Publish,
                Err("token_not_allowed"),
            ),
            (
                "publish only",
                &hs_tokens,
                Some(hs("k1", json!({"exp": later, "canvases": ["*"], "allow": ["publish"]}))),
                "any",
                Action::Publish,
                Ok(()),
            ),
            ("rs256", &rs_tokens, Some(rs(good.clone())), "c1", Action::Subscribe, Ok(())),
            ("wrong algorithm: hs256 to rs256", &rs_tokens, Some(hs("k1", good.clone())), "c1", Action::Subscribe, Err("invalid_token")),
            ("wrong algorithm: rs256 to hs256", &hs_tokens, Some(rs(good.clone())), "c1", Action::Subscribe, Err("invalid_token")),
            (
                // The public key used as an HMAC secret: the classic algorithm-confusion attack.
                "hs256 signed with the public key",
                &rs_tokens,
                Some(hs(RSA_PUBLIC, good.clone())),
                "c1",
                Action::Subscribe,
                Err("invalid_token"),
            ),
            (
                "alg none",
                &hs_tokens,
                Some(format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.", base64_url(&good.to_string()))),
                "c1",
                Action::Subscribe,
                Err("invalid_token"),
            ),
        ];
        for (name, tokens, token, canvas, action, want) in cases {
            let got = tokens.authorize(token.as_deref(), canvas, action).map(|_| ()).map_err(|e| e.code());
            assert_eq!(got, want, "{name}");
        }
    }

    fn base64_url(s: &str) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
    }

    #[test]
    fn refusals_are_401_or_403_with_a_short_reason() {
        assert_eq!(TokenError::Missing.api_error().status, 401);
        assert_eq!(TokenError::Expired.api_error().status, 401);
        assert_eq!(TokenError::Invalid("x".into()).api_error().status, 401);
        assert_eq!(TokenError::NotAllowed { canvas: "c".into(), action: "publish" }.api_error().status, 403);
        assert_eq!(TokenError::Expired.close_reason(), "token expired");
        assert!(TokenError::Invalid("x".repeat(300)).close_reason().len() <= 123);
    }

    #[test]
    fn a_grant_knows_its_remaining_time() {
        let g = ClientTokens::hs256(b"k").verify(Some(&hs("k", json!({"exp": now() + 100, "canvases": ["c"]})))).unwrap();
        let left = g.remaining(SystemTime::now());
        assert!(left > Duration::from_secs(95) && left <= Duration::from_secs(100), "{left:?}");
        assert_eq!(g.remaining(SystemTime::now() + Duration::from_secs(200)), Duration::ZERO);
    }

    #[test]
    fn settings_load_one_key() {
        assert!(ClientTokenSettings::default().load().unwrap().is_none());
        let hs = ClientTokenSettings { hs256_secret: Some("s".into()), rs256_public_key_file: None };
        assert!(hs.load().unwrap().is_some());
        assert!(hs.describe().iter().all(|(_, v)| v != "s"));
        let both = ClientTokenSettings { hs256_secret: Some("s".into()), rs256_public_key_file: Some("/x".into()) };
        assert_eq!(both.problems().len(), 1);
        let missing = ClientTokenSettings { hs256_secret: None, rs256_public_key_file: Some("/nonexistent/key.pem".into()) };
        assert!(missing.problems()[0].contains("/nonexistent/key.pem"));
    }
}
