//! Client tokens: a signed JWT (RFC 7519) that lets a client publish to or subscribe to some
//! channels until it expires, modelled on Centrifugo's connection and subscription tokens.
//!
//! Claims and header fields:
//!
//! | field | required | meaning |
//! |---|---|---|
//! | `exp` | yes | expiry, Unix seconds; no leeway |
//! | `nbf` | no | not before, Unix seconds; no leeway: a token used earlier is refused |
//! | `channels` (or `canvases`, its name before channels) | yes | the channels allowed: exact ids (`c1`, `scores:final`) or a prefix ending in `*` (`scores:*`, `team-*`; `*` alone is every channel) |
//! | `allow` | no | what the token may do: `["publish"]`, `["subscribe"]` or both (absent = both) |
//! | `aud` | with `CLIENT_TOKEN_AUDIENCE` | a string or an array that must hold that audience (without the setting, not looked at) |
//! | `iss` | with `CLIENT_TOKEN_ISSUER` | must be that issuer (without the setting, not looked at) |
//! | `sub` | no | who it was issued to (logged) |
//! | header `kid` | with `CLIENT_TOKEN_JWKS_FILE` | the id of the key that signed the token |
//!
//! The signature is checked with the key of one of three settings, by the `jsonwebtoken` crate:
//! HS256 with a shared secret of at least 32 bytes (`CLIENT_TOKEN_HS256_SECRET`, RFC 7518 §3.2),
//! RS256 with an RSA public key in PEM (`CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE`), or a JWKS file
//! (`CLIENT_TOKEN_JWKS_FILE`, RFC 7517: RSA keys for RS256, `oct` keys for HS256) whose key is
//! picked by the token's `kid` and which is re-read when it changes (`client_token/jwks.rs`). A
//! token of another algorithm than its key's (or `none`) is refused. With none of the three
//! settings, no token is needed.
//!
//! Refusals ([`TokenError`]): no token, a bad one (signature, algorithm, `kid`, shape, `aud`,
//! `iss`, an `nbf` still in the future) or an expired one are 401 (`missing_token`,
//! `invalid_token`, `token_expired`); a valid token that does not allow the channel or the action
//! is 403 `token_not_allowed`. A token not valid yet is `invalid_token` rather than a code of its
//! own: like a bad one, retrying it now will not help (RFC 6750's `invalid_token` covers it). On a
//! WebSocket they are close 1008 Policy Violation with the same words as the reason.

use crate::http::ApiError;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod jwks;

/// The shortest HS256 secret accepted, in bytes: RFC 7518 §3.2 wants a key at least as long as
/// the hash (256 bits); a shorter one can be brute-forced from a single token.
pub const MIN_HS256_SECRET_BYTES: usize = 32;

/// What a client does with a channel.
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
    /// `channels`, or its name of before channels, `canvases`.
    #[serde(alias = "channels")]
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
    channels: Vec<String>,
    allow: Vec<Action>,
}

impl Grant {
    /// Whether the token allows `action` on `channel`.
    pub fn allows(&self, channel: &str, action: Action) -> bool {
        self.allow.contains(&action) && self.channels.iter().any(|p| pattern_matches(p, channel))
    }

    /// [`Grant::allows`] as a result.
    ///
    /// # Errors
    /// [`TokenError::NotAllowed`].
    pub fn check(&self, channel: &str, action: Action) -> Result<(), TokenError> {
        if self.allows(channel, action) {
            Ok(())
        } else {
            Err(TokenError::NotAllowed { channel: channel.to_owned(), action: action.as_str() })
        }
    }

    /// How long from `now` until the token expires (zero when it has).
    pub fn remaining(&self, now: SystemTime) -> Duration {
        (UNIX_EPOCH + Duration::from_secs(self.exp)).duration_since(now).unwrap_or(Duration::ZERO)
    }
}

/// `c1` matches only `c1`; `team-*` every id starting with `team-`; `*` every id.
pub fn pattern_matches(pattern: &str, channel: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => channel.starts_with(prefix),
        None => pattern == channel,
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
    #[error("the token does not allow {action} on channel {channel}")]
    NotAllowed { channel: String, action: &'static str },
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

/// The algorithms a key can verify: HS256 (a shared secret) or RS256 (an RSA public key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyAlg {
    Hs256,
    Rs256,
}

impl KeyAlg {
    fn algorithm(self) -> Algorithm {
        match self {
            KeyAlg::Hs256 => Algorithm::HS256,
            KeyAlg::Rs256 => Algorithm::RS256,
        }
    }
}

/// What every token must pass besides its signature: `exp` (required, no leeway), `nbf` (when
/// present, no leeway), and `aud` / `iss` when required. One [`Validation`] per algorithm, because
/// jsonwebtoken refuses a key whose family does not fit every algorithm listed in it.
#[derive(Debug, Clone)]
struct Rules {
    hs256: Validation,
    rs256: Validation,
}

impl Rules {
    fn new() -> Self {
        let make = |alg| {
            let mut v = Validation::new(alg);
            v.leeway = 0;
            v.validate_exp = true;
            // jsonwebtoken leaves `nbf` unchecked unless told to.
            v.validate_nbf = true;
            // Without a required audience, `aud` is not looked at (a token may carry any).
            v.validate_aud = false;
            v.set_required_spec_claims(&["exp"]);
            v
        };
        Self { hs256: make(Algorithm::HS256), rs256: make(Algorithm::RS256) }
    }

    fn for_alg(&self, alg: KeyAlg) -> &Validation {
        match alg {
            KeyAlg::Hs256 => &self.hs256,
            KeyAlg::Rs256 => &self.rs256,
        }
    }

    fn each(&mut self) -> [&mut Validation; 2] {
        [&mut self.hs256, &mut self.rs256]
    }
}

/// Where the verifying key comes from.
#[derive(Clone)]
enum Keys {
    /// One key for every token (HS256 secret or RS256 PEM).
    One { key: DecodingKey, alg: KeyAlg },
    /// A JWKS file, re-read when it changes: the token's `kid` picks the key.
    Jwks(Arc<jwks::JwksFile>),
}

/// The keys and rules that verify client tokens.
#[derive(Clone)]
pub struct ClientTokens {
    keys: Keys,
    rules: Rules,
}

impl std::fmt::Debug for ClientTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.keys {
            Keys::One { alg, .. } => write!(f, "ClientTokens({:?})", alg.algorithm()),
            Keys::Jwks(file) => write!(f, "ClientTokens(JWKS {})", file.path().display()),
        }
    }
}

impl ClientTokens {
    fn with(keys: Keys) -> Self {
        Self { keys, rules: Rules::new() }
    }

    /// Tokens signed with HS256 and `secret`.
    ///
    /// # Errors
    /// When `secret` is shorter than [`MIN_HS256_SECRET_BYTES`].
    pub fn hs256(secret: &[u8]) -> Result<Self, String> {
        check_hs256_len(secret.len())?;
        Ok(Self::with(Keys::One { key: DecodingKey::from_secret(secret), alg: KeyAlg::Hs256 }))
    }

    /// Tokens signed with RS256, verified with the RSA public key in `pem`.
    ///
    /// # Errors
    /// When `pem` is not an RSA public key in PEM.
    pub fn rs256_pem(pem: &[u8]) -> Result<Self, String> {
        let key = DecodingKey::from_rsa_pem(pem).map_err(|e| format!("not an RSA public key in PEM: {e}"))?;
        Ok(Self::with(Keys::One { key, alg: KeyAlg::Rs256 }))
    }

    /// Tokens signed with one of the keys of the JWKS file at `path`, picked by the token's `kid`.
    /// The file is looked at again at most once a second while tokens are verified, and re-read
    /// when its modification time, length or inode changed; a changed file that is not a valid key
    /// set leaves the previous keys in use (with a warning in the log).
    ///
    /// # Errors
    /// When the file cannot be read or is not a valid key set (see `client_token/jwks.rs`).
    pub fn jwks_file(path: &Path) -> Result<Self, String> {
        Ok(Self::with(Keys::Jwks(Arc::new(jwks::JwksFile::open(path, jwks::CHECK_EVERY)?))))
    }

    /// Also require an `aud` claim holding `audience` (a string equal to it, or an array with it).
    #[must_use]
    pub fn require_audience(mut self, audience: &str) -> Self {
        for v in self.rules.each() {
            v.validate_aud = true;
            v.set_audience(&[audience]);
            v.required_spec_claims.insert("aud".to_owned());
        }
        self
    }

    /// Also require an `iss` claim equal to `issuer`.
    #[must_use]
    pub fn require_issuer(mut self, issuer: &str) -> Self {
        for v in self.rules.each() {
            v.set_issuer(&[issuer]);
            v.required_spec_claims.insert("iss".to_owned());
        }
        self
    }

    /// Verifies `token` (key, signature, algorithm, `exp` and `nbf` against the clock, `aud` and
    /// `iss` when required) and reads its grant.
    ///
    /// # Errors
    /// [`TokenError::Missing`], [`TokenError::Expired`] or [`TokenError::Invalid`].
    pub fn verify(&self, token: Option<&str>) -> Result<Grant, TokenError> {
        let token = token.map(str::trim).filter(|t| !t.is_empty()).ok_or(TokenError::Missing)?;
        let data = match &self.keys {
            Keys::One { key, alg } => jsonwebtoken::decode::<Claims>(token, key, self.rules.for_alg(*alg)),
            Keys::Jwks(file) => {
                // The set in use now; a reload meanwhile does not change it under this token.
                let set = file.keys();
                let (key, alg) = set.pick(token)?;
                jsonwebtoken::decode::<Claims>(token, key, self.rules.for_alg(alg))
            }
        }
        .map_err(refusal)?;
        let c = data.claims;
        Ok(Grant {
            exp: c.exp,
            sub: c.sub,
            channels: c.canvases,
            allow: c.allow.unwrap_or_else(|| vec![Action::Publish, Action::Subscribe]),
        })
    }

    /// Verifies `token` and checks that it allows `action` on `channel`.
    ///
    /// # Errors
    /// Any [`TokenError`].
    pub fn authorize(&self, token: Option<&str>, channel: &str, action: Action) -> Result<Grant, TokenError> {
        let grant = self.verify(token)?;
        grant.check(channel, action)?;
        Ok(grant)
    }
}

/// The refusal for a jsonwebtoken error, in words a client's developer can act on.
fn refusal(e: jsonwebtoken::errors::Error) -> TokenError {
    TokenError::Invalid(match e.kind() {
        ErrorKind::ExpiredSignature => return TokenError::Expired,
        ErrorKind::ImmatureSignature => "not valid yet (its nbf is in the future)".to_owned(),
        ErrorKind::MissingRequiredClaim(claim) => format!("no {claim} claim"),
        ErrorKind::InvalidAudience => "its aud is not this service's audience".to_owned(),
        ErrorKind::InvalidIssuer => "its iss is not the expected issuer".to_owned(),
        ErrorKind::InvalidAlgorithm => "its alg is not the key's algorithm".to_owned(),
        ErrorKind::InvalidSignature => "bad signature".to_owned(),
        _ => e.to_string(),
    })
}

/// RFC 7518 §3.2: an HS256 key has at least 256 bits.
fn check_hs256_len(len: usize) -> Result<(), String> {
    if len < MIN_HS256_SECRET_BYTES {
        return Err(format!(
            "an HS256 secret of {len} bytes; at least {MIN_HS256_SECRET_BYTES} are needed (RFC 7518 §3.2), e.g. the output of openssl rand -hex 32"
        ));
    }
    Ok(())
}

/// The client-token settings of a service (`#[command(flatten)]` in its `Config`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClientTokenSettings {
    /// Require client tokens signed with HS256 and this secret (at least 32 bytes), for publishing
    /// and subscribing.
    #[arg(long = "client-token-hs256-secret", env = "CLIENT_TOKEN_HS256_SECRET", hide_env_values = true)]
    pub hs256_secret: Option<String>,
    /// Require client tokens signed with RS256, verified with the RSA public key in this PEM file.
    #[arg(long = "client-token-rs256-public-key-file", env = "CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE")]
    pub rs256_public_key_file: Option<PathBuf>,
    /// Require client tokens signed with a key of this JWKS file (RFC 7517: RSA keys for RS256,
    /// `oct` keys for HS256), picked by the token's `kid`; the file is re-read when it changes.
    #[arg(long = "client-token-jwks-file", env = "CLIENT_TOKEN_JWKS_FILE")]
    pub jwks_file: Option<PathBuf>,
    /// Require client tokens whose `aud` claim holds this audience.
    #[arg(long = "client-token-audience", env = "CLIENT_TOKEN_AUDIENCE")]
    pub audience: Option<String>,
    /// Require client tokens whose `iss` claim is this issuer.
    #[arg(long = "client-token-issuer", env = "CLIENT_TOKEN_ISSUER")]
    pub issuer: Option<String>,
}

impl ClientTokenSettings {
    fn secret(&self) -> Option<&str> {
        self.hs256_secret.as_deref().filter(|s| !s.is_empty())
    }

    fn audience(&self) -> Option<&str> {
        self.audience.as_deref().filter(|s| !s.is_empty())
    }

    fn issuer(&self) -> Option<&str> {
        self.issuer.as_deref().filter(|s| !s.is_empty())
    }

    /// The verifier, or `None` when client tokens are off.
    ///
    /// # Errors
    /// More than one key setting given; a secret shorter than 32 bytes; a key file unreadable or
    /// not a key; an audience or issuer required without a key.
    pub fn load(&self) -> Result<Option<ClientTokens>, String> {
        let given: Vec<&str> = [
            ("CLIENT_TOKEN_HS256_SECRET", self.secret().is_some()),
            ("CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE", self.rs256_public_key_file.is_some()),
            ("CLIENT_TOKEN_JWKS_FILE", self.jwks_file.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        match given.as_slice() {
            [_, _] => return Err(format!("{} are both set; choose one", given.join(" and "))),
            [_, _, _] => return Err(format!("{} are all set; choose one", given.join(", "))),
            _ => {}
        }
        let tokens = if let Some(secret) = self.secret() {
            ClientTokens::hs256(secret.as_bytes()).map_err(|e| format!("CLIENT_TOKEN_HS256_SECRET: {e}"))?
        } else if let Some(path) = &self.rs256_public_key_file {
            let pem = std::fs::read(path).map_err(|e| format!("CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE {}: {e}", path.display()))?;
            ClientTokens::rs256_pem(&pem).map_err(|e| format!("CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE {}: {e}", path.display()))?
        } else if let Some(path) = &self.jwks_file {
            ClientTokens::jwks_file(path).map_err(|e| format!("CLIENT_TOKEN_JWKS_FILE {}: {e}", path.display()))?
        } else if self.audience().is_some() || self.issuer().is_some() {
            // Refused rather than ignored: whoever set them meant tokens to be checked.
            return Err("CLIENT_TOKEN_AUDIENCE and CLIENT_TOKEN_ISSUER need a key: set CLIENT_TOKEN_HS256_SECRET, \
                        CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE or CLIENT_TOKEN_JWKS_FILE"
                .to_owned());
        } else {
            return Ok(None);
        };
        let tokens = match self.audience() {
            Some(aud) => tokens.require_audience(aud),
            None => tokens,
        };
        Ok(Some(match self.issuer() {
            Some(iss) => tokens.require_issuer(iss),
            None => tokens,
        }))
    }

    /// The problems of these settings (empty when valid), for a `Config::problems`.
    pub fn problems(&self) -> Vec<String> {
        self.load().err().into_iter().collect()
    }

    /// `VARIABLE=value` pairs for a `Config::describe` (the secret is not shown).
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        vec![
            ("CLIENT_TOKEN_HS256_SECRET", if self.secret().is_some() { "<set>".to_owned() } else { String::new() }),
            ("CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE", path(&self.rs256_public_key_file)),
            ("CLIENT_TOKEN_JWKS_FILE", path(&self.jwks_file)),
            ("CLIENT_TOKEN_AUDIENCE", self.audience().unwrap_or_default().to_owned()),
            ("CLIENT_TOKEN_ISSUER", self.issuer().unwrap_or_default().to_owned()),
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

    // HS256 secrets of 32 bytes and more, as the verifier requires.
    const K1: &str = "k1-client-token-secret-0123456789";
    const K2: &str = "k2-client-token-secret-0123456789";

    fn now() -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
    }

    fn hs(secret: &str, claims: serde_json::Value) -> String {
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(secret.as_bytes())).unwrap()
    }

    fn rs(claims: serde_json::Value) -> String {
        encode(&Header::new(Algorithm::RS256), &claims, &EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap()).unwrap()
    }

    /// (name, verifier, token, channel, action, expected code).
    type Case<'a> = (&'a str, &'a ClientTokens, Option<String>, &'a str, Action, Result<(), &'a str>);

    #[test]
    fn token_checks_table() {
        let hs_tokens = ClientTokens::hs256(K1.as_bytes()).unwrap();
        let rs_tokens = ClientTokens::rs256_pem(RSA_PUBLIC.as_bytes()).unwrap();
        let later = now() + 600;
        let good = json!({"exp": later, "sub": "u1", "canvases": ["c1", "team-*"]});
        let cases: Vec<Case> = vec![
            ("missing", &hs_tokens, None, "c1", Action::Subscribe, Err("missing_token")),
            ("empty", &hs_tokens, Some(String::new()), "c1", Action::Subscribe, Err("missing_token")),
            ("garbage", &hs_tokens, Some("not.a.jwt".into()), "c1", Action::Subscribe, Err("invalid_token")),
            ("right", &hs_tokens, Some(hs(K1, good.clone())), "c1", Action::Subscribe, Ok(())),
            ("right, publish", &hs_tokens, Some(hs(K1, good.clone())), "c1", Action::Publish, Ok(())),
            ("right, prefix", &hs_tokens, Some(hs(K1, good.clone())), "team-blue", Action::Subscribe, Ok(())),
            ("wrong secret", &hs_tokens, Some(hs(K2, good.clone())), "c1", Action::Subscribe, Err("invalid_token")),
            ("expired", &hs_tokens, Some(hs(K1, json!({"exp": now() - 5, "canvases": ["c1"]}))), "c1", Action::Subscribe, Err("token_expired")),
            ("no exp", &hs_tokens, Some(hs(K1, json!({"canvases": ["c1"]}))), "c1", Action::Subscribe, Err("invalid_token")),
            ("no canvases", &hs_tokens, Some(hs(K1, json!({"exp": later}))), "c1", Action::Subscribe, Err("invalid_token")),
            ("wrong canvas", &hs_tokens, Some(hs(K1, good.clone())), "c2", Action::Subscribe, Err("token_not_allowed")),
            ("prefix is not a match", &hs_tokens, Some(hs(K1, good.clone())), "team", Action::Subscribe, Err("token_not_allowed")),
            ("exact is not a prefix", &hs_tokens, Some(hs(K1, good.clone())), "c10", Action::Subscribe, Err("token_not_allowed")),
            (
                "subscribe only",
                &hs_tokens,
                Some(hs(K1, json!({"exp": later, "canvases": ["*"], "allow": ["subscribe"]}))),
                "c1",
                Action::Publish,
                Err("token_not_allowed"),
            ),
            (
                "publish only",
                &hs_tokens,
                Some(hs(K1, json!({"exp": later, "canvases": ["*"], "allow": ["publish"]}))),
                "any",
                Action::Publish,
                Ok(()),
            ),
            ("rs256", &rs_tokens, Some(rs(good.clone())), "c1", Action::Subscribe, Ok(())),
            ("channels claim", &hs_tokens, Some(hs(K1, json!({"exp": later, "channels": ["scores:*"]}))), "scores:final", Action::Subscribe, Ok(())),
            ("channels claim, another namespace", &hs_tokens, Some(hs(K1, json!({"exp": later, "channels": ["scores:*"]}))), "chat:a", Action::Subscribe, Err("token_not_allowed")),
            ("wrong algorithm: hs256 to rs256", &rs_tokens, Some(hs(K1, good.clone())), "c1", Action::Subscribe, Err("invalid_token")),
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
        for (name, tokens, token, channel, action, want) in cases {
            let got = tokens.authorize(token.as_deref(), channel, action).map(|_| ()).map_err(|e| e.code());
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
        assert_eq!(TokenError::NotAllowed { channel: "c".into(), action: "publish" }.api_error().status, 403);
        assert_eq!(TokenError::Expired.close_reason(), "token expired");
        assert!(TokenError::Invalid("x".repeat(300)).close_reason().len() <= 123);
    }

    #[test]
    fn a_grant_knows_its_remaining_time() {
        let g = ClientTokens::hs256(K1.as_bytes()).unwrap().verify(Some(&hs(K1, json!({"exp": now() + 100, "canvases": ["c"]})))).unwrap();
        let left = g.remaining(SystemTime::now());
        assert!(left > Duration::from_secs(95) && left <= Duration::from_secs(100), "{left:?}");
        assert_eq!(g.remaining(SystemTime::now() + Duration::from_secs(200)), Duration::ZERO);
    }

    /// (name, verifier, claims, expected code, words of the refusal).
    type ClaimsCase<'a> = (&'a str, &'a ClientTokens, serde_json::Value, Result<(), &'a str>, &'a str);

    #[test]
    fn nbf_aud_and_iss_table() {
        let plain = ClientTokens::hs256(K1.as_bytes()).unwrap();
        let aud = plain.clone().require_audience("canvas-fleet");
        let iss = plain.clone().require_issuer("https://issuer.example");
        let both = aud.clone().require_issuer("https://issuer.example");
        let (later, c) = (now() + 600, ["c1"]);
        let cases: Vec<ClaimsCase> = vec![
            ("nbf in the future", &plain, json!({"exp": later, "nbf": now() + 60, "canvases": c}), Err("invalid_token"), "not valid yet"),
            ("nbf two seconds ahead (no leeway)", &plain, json!({"exp": later, "nbf": now() + 2, "canvases": c}), Err("invalid_token"), "nbf"),
            ("nbf in the past", &plain, json!({"exp": later, "nbf": now() - 60, "canvases": c}), Ok(()), ""),
            ("nbf now", &plain, json!({"exp": later, "nbf": now(), "canvases": c}), Ok(()), ""),
            ("aud not required: any is fine", &plain, json!({"exp": later, "aud": "other", "canvases": c}), Ok(()), ""),
            ("iss not required: any is fine", &plain, json!({"exp": later, "iss": "other", "canvases": c}), Ok(()), ""),
            ("aud required, missing", &aud, json!({"exp": later, "canvases": c}), Err("invalid_token"), "no aud claim"),
            ("aud required, wrong", &aud, json!({"exp": later, "aud": "other", "canvases": c}), Err("invalid_token"), "aud"),
            ("aud required, right", &aud, json!({"exp": later, "aud": "canvas-fleet", "canvases": c}), Ok(()), ""),
            ("aud required, in an array", &aud, json!({"exp": later, "aud": ["x", "canvas-fleet"], "canvases": c}), Ok(()), ""),
            ("aud required, not in the array", &aud, json!({"exp": later, "aud": ["x", "y"], "canvases": c}), Err("invalid_token"), "aud"),
            ("aud required, wrong case", &aud, json!({"exp": later, "aud": "Canvas-Fleet", "canvases": c}), Err("invalid_token"), "aud"),
            ("iss required, missing", &iss, json!({"exp": later, "canvases": c}), Err("invalid_token"), "no iss claim"),
            ("iss required, wrong", &iss, json!({"exp": later, "iss": "https://evil.example", "canvases": c}), Err("invalid_token"), "iss"),
            ("iss required, right", &iss, json!({"exp": later, "iss": "https://issuer.example", "canvases": c}), Ok(()), ""),
            (
                "both required, both right",
                &both,
                json!({"exp": later, "aud": "canvas-fleet", "iss": "https://issuer.example", "canvases": c}),
                Ok(()),
                "",
            ),
            ("both required, iss missing", &both, json!({"exp": later, "aud": "canvas-fleet", "canvases": c}), Err("invalid_token"), "iss"),
            ("both required, still expires", &both, json!({"exp": now() - 1, "aud": "canvas-fleet", "iss": "https://issuer.example", "canvases": c}), Err("token_expired"), ""),
        ];
        for (name, tokens, claims, want, words) in cases {
            let got = tokens.authorize(Some(&hs(K1, claims)), "c1", Action::Subscribe);
            assert_eq!(got.as_ref().map(|_| ()).map_err(TokenError::code), want, "{name}");
            if let Err(e) = got {
                assert!(e.to_string().contains(words), "{name}: {e}");
            }
        }
    }

    #[test]
    fn short_hs256_secrets_are_refused() {
        let secret = |n: usize| ClientTokenSettings { hs256_secret: Some("Z".repeat(n)), ..Default::default() };
        // (secret length in bytes, accepted).
        for (len, ok) in [(1, false), (10, false), (31, false), (32, true), (64, true)] {
            let problems = secret(len).problems();
            assert_eq!(problems.is_empty(), ok, "{len} bytes: {problems:?}");
            assert_eq!(ClientTokens::hs256("Z".repeat(len).as_bytes()).is_ok(), ok, "{len} bytes");
            if let Some(p) = problems.first() {
                assert!(p.starts_with("CLIENT_TOKEN_HS256_SECRET: ") && p.contains(&format!("{len} bytes")) && p.contains("32"), "{p}");
                assert!(!p.contains('Z'), "the secret is not shown: {p}");
            }
        }
        assert!(secret(0).problems().is_empty(), "an empty secret is no setting");
        // Bytes, not characters: 11 three-byte characters are 33 bytes.
        assert!(ClientTokenSettings { hs256_secret: Some("€".repeat(11)), ..Default::default() }.problems().is_empty());
    }

    #[test]
    fn settings_load_one_key() {
        let path = |p: &str| Some(PathBuf::from(p));
        assert!(ClientTokenSettings::default().load().unwrap().is_none());
        let hs = ClientTokenSettings { hs256_secret: Some(K1.into()), ..Default::default() };
        assert!(hs.load().unwrap().is_some());
        assert!(hs.describe().iter().all(|(_, v)| v != K1));
        let both = ClientTokenSettings { hs256_secret: Some(K1.into()), rs256_public_key_file: path("/x"), ..Default::default() };
        assert_eq!(
            both.problems(),
            ["CLIENT_TOKEN_HS256_SECRET and CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE are both set; choose one"]
        );
        let jwks_and_secret = ClientTokenSettings { hs256_secret: Some(K1.into()), jwks_file: path("/x"), ..Default::default() };
        assert_eq!(jwks_and_secret.problems(), ["CLIENT_TOKEN_HS256_SECRET and CLIENT_TOKEN_JWKS_FILE are both set; choose one"]);
        let jwks_and_pem = ClientTokenSettings { rs256_public_key_file: path("/x"), jwks_file: path("/y"), ..Default::default() };
        assert_eq!(jwks_and_pem.problems(), ["CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE and CLIENT_TOKEN_JWKS_FILE are both set; choose one"]);
        let all = ClientTokenSettings { hs256_secret: Some(K1.into()), rs256_public_key_file: path("/x"), jwks_file: path("/y"), ..Default::default() };
        assert!(all.problems()[0].ends_with("are all set; choose one"), "{:?}", all.problems());
        let missing = ClientTokenSettings { rs256_public_key_file: path("/nonexistent/key.pem"), ..Default::default() };
        assert!(missing.problems()[0].contains("/nonexistent/key.pem"));
        let missing_jwks = ClientTokenSettings { jwks_file: path("/nonexistent/keys.json"), ..Default::default() };
        assert!(missing_jwks.problems()[0].starts_with("CLIENT_TOKEN_JWKS_FILE /nonexistent/keys.json: "), "{:?}", missing_jwks.problems());
        // An audience or issuer without a key would leave tokens off: refused rather than ignored.
        let aud_alone = ClientTokenSettings { audience: Some("canvas-fleet".into()), ..Default::default() };
        assert!(aud_alone.problems()[0].contains("need a key"), "{:?}", aud_alone.problems());
        let iss_alone = ClientTokenSettings { issuer: Some("me".into()), ..Default::default() };
        assert_eq!(iss_alone.problems().len(), 1);
    }

    #[test]
    fn settings_require_aud_and_iss_and_describe_them() {
        let s = ClientTokenSettings {
            rs256_public_key_file: Some(PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/client_token_rsa.pub"))),
            audience: Some("canvas-fleet".into()),
            issuer: Some("https://issuer.example".into()),
            ..Default::default()
        };
        let tokens = s.load().unwrap().unwrap();
        let later = now() + 600;
        assert_eq!(tokens.verify(Some(&rs(json!({"exp": later, "canvases": ["c"]})))).unwrap_err().code(), "invalid_token");
        let right = json!({"exp": later, "aud": "canvas-fleet", "iss": "https://issuer.example", "canvases": ["c"]});
        assert!(tokens.verify(Some(&rs(right))).is_ok());
        let described: Vec<String> = s.describe().into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        for line in ["CLIENT_TOKEN_AUDIENCE=canvas-fleet", "CLIENT_TOKEN_ISSUER=https://issuer.example", "CLIENT_TOKEN_JWKS_FILE=", "CLIENT_TOKEN_HS256_SECRET="] {
            assert!(described.iter().any(|l| l == line), "{line} in {described:?}");
        }
    }
}
